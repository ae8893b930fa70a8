"""Pure core shared by every layer: event contract, hashtag extraction, sketch and window math, scoring.

Nothing here imports Kafka, Redis or Spark, so it is unit-testable in milliseconds and the
speed and batch layers extract and count tags identically.
"""
