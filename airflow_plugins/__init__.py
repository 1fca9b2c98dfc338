"""Airflow integration of memwal-jobs: a hook, operators, sensors, triggers and a plugin.

Importing this package does not import Airflow: Airflow itself loads
``memwal.airflow.provider`` while it initialises its configuration, so the package root
must stay light. Import the submodules (``memwal.airflow.operators`` ...) for the classes.
"""
