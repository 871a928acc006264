"""What a person reviews: MLflow tracking of searches (`tracking`, the only module that imports
mlflow), figures (`figures`, matplotlib, imported when drawing; the 3-D page is our own),
units chosen for the data (`units`), the reference points of a front (`marks`), text reports
(`report`, `table`) and fidelity statistics (`stats`).
"""
