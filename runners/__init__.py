"""gnnscale runners: one run's launcher (run.py), its settings and the sweep's grammar; the rooms
by role: launch/, watch/, rank/, records/, partitioned/, checks/, with datasets/, memory/ and
the framework adapters/."""
