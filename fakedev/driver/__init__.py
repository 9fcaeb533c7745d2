"""The fake driver's node-side logic: claim validation, device preparation, CDI and metadata, checkpoint, status."""
