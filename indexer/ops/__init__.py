"""What runs beside or after a build: the watcher, verify and repair, snapshots, and the git-history index."""
