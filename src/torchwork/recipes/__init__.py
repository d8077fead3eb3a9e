"""End-to-end recipes, built only from torchwork's public API."""
