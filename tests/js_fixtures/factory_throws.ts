export default async () => {
  throw new EvalError("factory broke");
};
