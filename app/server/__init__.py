"""The serving process: the result store, lecture preparation, the class database, the allocator's trim."""
