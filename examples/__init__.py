"""Example feature repositories."""
