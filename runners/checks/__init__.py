"""Checks of the environment: the doctor and the one-command GPU check."""
