"""Facts per run: runs, classification of batches, the ticket record."""
