"""What a run costs before it runs: FLOPs and bytes per phase (`costs`), memory per
device from the compiled programs, and the estimated step time and GPU-hours."""
