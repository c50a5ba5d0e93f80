"""A model scored (`zerolab eval`: validation, WikiText, HellaSwag) and sampled (`zerolab generate`)."""
