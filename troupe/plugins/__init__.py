"""In-tree plugins, one module each. Plugins never import each other."""
