"""What lucepatch knows about a GPU node: its report (report.py) and the gates that read it
(driver.py: will an image's CUDA start on the node's driver?). Issue 27's `doctor --pod` writes the
node report; it extends NodeReport with the fields it adds."""
