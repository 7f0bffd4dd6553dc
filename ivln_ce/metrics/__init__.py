"""Episodic VLN metrics and tour nDTW over one exact DTW kernel (numpy/numba only)."""
