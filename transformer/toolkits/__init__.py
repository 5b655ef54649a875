"""Models trained with the machine-translation toolkits (fairseq) read in place from the files they leave."""
