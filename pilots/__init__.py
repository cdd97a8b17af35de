"""Agentic pilots: SWE-bench Lite and Terminal-Bench at the pilot configs."""
