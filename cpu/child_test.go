package cpu

func runChild() bool { return false }
