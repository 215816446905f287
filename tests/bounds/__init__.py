"""Resource bounds (issue 8): hostile inputs are refused, or read, within a documented cap."""
