"""What lucepatch knows about a GPU node: its report (report.py: written by `node --pod`, or by hand with
the driver only) and the gates that read it (driver.py: will an image's CUDA start on the node's driver?;
the library it preloads is judged by lines/replace.py and the deploy gates)."""
