"""What a run is written as for other tools to read: each format a module here, each a writer over the records
(results/rows.py for the tables), each through its field's own library."""
