"""Models trained with the machine-translation toolkits (fairseq, Marian, eole, OpenNMT-py) read in place from the
files they leave."""
