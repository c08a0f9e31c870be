"""The framework-neutral core of ironmem. Imports no langchain and no llama_index, ever."""
