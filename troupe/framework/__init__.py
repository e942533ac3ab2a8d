"""The plugin API (what plugins see) and the runtime that calls plugins."""
