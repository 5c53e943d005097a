"""What a user asks for, one home each: the API and the console both call these."""
