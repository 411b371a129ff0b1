"""Protocol doubles: real loopback HTTP servers that stand in for servers the tests cannot run."""
