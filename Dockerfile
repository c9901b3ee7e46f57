FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml ./
COPY . .
RUN pip install --no-cache-dir . && useradd --create-home portal
USER portal
ENV PYTHONUNBUFFERED=1
CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000"]
