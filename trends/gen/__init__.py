"""The load generator: a reproducible, realistic stream of posts and engagements with ground truth."""
