"""What a person reviews: MLflow tracking of searches (`tracking`, the only module that imports
mlflow), figures (`figures`, matplotlib and plotly, imported when drawing), units chosen for the
data (`units`), the reference points of a front (`marks`), text reports (`report`) and fidelity
statistics (`stats`).
"""
