# A training script of the user's own, as the golden job scripts deploy it (its digest is in them).
print("training")
