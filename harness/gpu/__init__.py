"""One GPU abstraction (control side): NVML control calls, the power cap and locked SM clock as sweep dimensions, the setting applied per pass, and NVML's clock-event reason bits."""
