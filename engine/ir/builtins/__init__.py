"""The language's built-in functions as compositions of IR ops."""
