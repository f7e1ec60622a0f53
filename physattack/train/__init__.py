"""Training the bundled victims on rendered views."""
