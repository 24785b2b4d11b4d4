"""The pipeline driver: plain PySpark, no Django imports, so it runs the same way on a cluster."""
