throw new URIError("broken at import");
