"""The seminar report: its tables in its layout, the published values beside ours, its claims."""
