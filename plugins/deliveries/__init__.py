"""Built-in subscription delivery kinds."""
