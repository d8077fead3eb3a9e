"""Self-contained HTML run reports with embedded plots."""
