"""Modal screens: event detail, inject, confirm."""
