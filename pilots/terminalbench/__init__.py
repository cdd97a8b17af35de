"""terminalbench package."""
