"""`zerolab demo`: the seed study on CPU, from data to summary."""
