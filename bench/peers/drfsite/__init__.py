"""A Django REST framework application over the snapshot's SQLite export: the stack the
original service runs on, with its models, serializers, limit/offset pagination and filters."""
