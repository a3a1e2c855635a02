"""The test suite. Imported before any test module, and so before torch: on a machine without a GPU the
suite's cells run torch with one intra-op thread. On the 2-core CI machine a cell's two OpenMP threads
spun against the suite's other processes: a tiny compiled cell took 15.8 s of CPU with two threads and
8.7 s with one, at once quicker by the clock (docs/testing.md). A GPU machine runs cells as users do."""

import os

if not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
