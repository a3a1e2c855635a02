"""The grid and its configuration: a sweep's cells, their expansion from Hydra overrides, their files in
the sweep directory, the config groups and store, the cluster profile, the shipped files, Hydra's and
submitit's private APIs, one error line."""
