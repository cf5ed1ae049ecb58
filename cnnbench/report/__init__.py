"""Charts and tables from results CSVs: training (throughput, scaling, accuracy) and inference."""
