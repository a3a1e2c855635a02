"""The sweep driver and the rounds of repeats=auto: the policy above the executors."""
