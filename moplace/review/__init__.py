"""What a person reviews: MLflow tracking of searches (`tracking`, the only module that imports
mlflow), text reports (`report`) and fidelity statistics (`stats`).
"""
