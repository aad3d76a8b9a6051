"""The dataflow API (re-exported from :mod:`accelflow`)."""
