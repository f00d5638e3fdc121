"""Integrations with outside services, as in Fennel's ``fennel.integrations``."""
