"""DRF glue shared by every app's API; settings name the schema class, parser and pagination by dotted path."""
