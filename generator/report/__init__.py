"""`microtvm-gen report` and `run --profile`: what a built firmware holds and where its time
goes (memory by region, the layers, the stack bound, pictures)."""
