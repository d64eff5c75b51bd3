"""Line normalisation: escapes, tqdm redraws, wrapper and engine prefixes."""
