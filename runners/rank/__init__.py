"""Inside one rank: the training harnesses, what the loop records and when a timing run stops."""
