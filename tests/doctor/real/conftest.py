"""The corpus scripts run under the doctor (tests/doctor/test_doctor_real.py), never imported by pytest."""

collect_ignore = ["correct", "bugs"]
