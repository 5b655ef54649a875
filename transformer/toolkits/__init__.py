"""Models trained with the machine-translation toolkits (fairseq, Marian, eole) read in place from the files they
leave."""
