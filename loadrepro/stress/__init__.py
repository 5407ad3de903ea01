"""`loadrepro stress`: a battery of the traffic that breaks engines, a verdict per phase, a matrix of builds."""
