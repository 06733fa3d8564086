"""Configuration: the options' dataclasses, the YAML file, the shipped examples and configs."""
