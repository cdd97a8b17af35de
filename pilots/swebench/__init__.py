"""swebench package."""
