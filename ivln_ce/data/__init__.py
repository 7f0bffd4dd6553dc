"""Official IR2R-CE file formats: episodes, vocabulary, tours, target and agent tour paths."""
