NAME = input()
